"""Change safety: what a policy change does, and what a principal may do.

* ``diff`` — ``diff_policies(old, new)``: every request whose decision differs
  between two compiled policies, found by deciding witness requests derived
  from the policies themselves (``space``) and grouped by ``compare``;
* ``compare`` — decide a list of requests under two policies and group the
  differences (reused by anything that replays recorded requests);
* ``query`` — the resource patterns under which a principal's calls could be
  allowed, with residual conditions (``residual``) and carve-outs, from the
  partial evaluator;
* ``space`` — the witness requests of one tool: ``atoms`` (what conditions
  tell apart, variable by variable), ``domains`` (the values worth trying),
  ``resource_atoms`` (conditions on the resource as patterns);
* ``strings`` and ``segments`` — the automata behind the witnesses: one
  representative string per way of satisfying a set of globs, one resource per
  combination of patterns a resource can match.

Nothing here is on a decision's hot path; every module reads a ``PolicySet``
(compiled from sources or loaded from a bundle) through its public records.
"""
