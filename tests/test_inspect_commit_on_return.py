"""Inside Inspect a sample's score is committed before Inspect receives it: each scorer of a
``select_best(task)`` is wrapped so that its return commits the score, synchronously, on the way back
(the ``on_sample_event`` hook alone came from a queue a busy event loop holds, and a ``kill -9`` in
that lag generated scored samples again)."""
import asyncio
import types

from pulse_jax.harnesses import inspect_hooks


def test_a_wrapped_scorer_commits_the_score_before_it_returns_it():
    events = []

    class Selection:
        def score_returned(self, model, sample_id, event):
            events.append(("committed", model, sample_id, event.scorer, event.score))

    async def match(state, target):
        events.append(("scored", state.sample_id))
        return "Score(C)"

    match.registry_entry = "inspect's registry attributes"      # copied: Inspect sees the scorer it was given
    wrapped = inspect_hooks._committing(match, "match", Selection(), "toy/m70")
    returned = asyncio.run(wrapped(types.SimpleNamespace(sample_id=17), "target"))
    assert returned == "Score(C)"
    assert events == [("scored", 17), ("committed", "toy/m70", 17, "match", "Score(C)")]
    assert wrapped.registry_entry == "inspect's registry attributes" and wrapped.__wrapped__ is match

