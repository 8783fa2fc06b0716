"""Engine adapters of the peer benchmark: SharedOS, the indexed reference, Cedar, Casbin, Rego."""
