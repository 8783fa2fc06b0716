"""A scripted model endpoint for offline conformance (Anthropic Messages, OpenAI Responses, chat completions).

It stands in the model provider's seat for an installed harness CLI: it reads
the tools the harness offers, finds each manifest tool under the harness's own
alias and issues the manifest's attempts one by one, then ends the turn. It
declares itself as ``sharedos-scripted-model/<version>``, never as a real model.
"""

from sharedos.testing.scripted_model.plan import (
    SCRIPTED_MODEL_NAME,
    SERVER_NAME,
    IssuedCall,
    ScriptedAttempt,
    ToolAlias,
    guess_aliases,
    resolve_aliases,
)
from sharedos.testing.scripted_model.server import ScriptedModelServer

__all__ = [
    "SCRIPTED_MODEL_NAME",
    "SERVER_NAME",
    "IssuedCall",
    "ScriptedAttempt",
    "ScriptedModelServer",
    "ToolAlias",
    "guess_aliases",
    "resolve_aliases",
]
