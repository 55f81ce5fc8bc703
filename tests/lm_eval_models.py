"""A deterministic lm-evaluation-harness model for the tests, registered as ``pulse_arith``.

It answers the test task's "Question K: what is A + B?" documents: with probability ``skill``
(decided per (seed, question) by a hash, so the same document always gets the same answer) it
knows the sum and gives the right choice the highest log-likelihood; otherwise it guesses. Every
request it computes is appended to ``$PULSE_LM_CALLS`` as ``<seed> <question>`` (to count what
the model was asked), and reported to lm-eval's cache hook as it is computed, as real models do.
"""
import hashlib
import os
import re
import time

from lm_eval.api.model import LM
from lm_eval.api.registry import register_model

QUESTION = re.compile(r"Question (\d+): what is (-?\d+) \+ (-?\d+)\?")


def _unit(*parts) -> float:
    digest = hashlib.sha256(" ".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@register_model("pulse_arith")
class ArithmeticLM(LM):
    def __init__(self, skill=0.5, seed=0, **_ignored):
        super().__init__()
        self.skill, self.seed = float(skill), int(seed)

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        out = []
        log = os.environ.get("PULSE_LM_CALLS")
        for request in requests:
            context, continuation = request.args
            question, a, b = QUESTION.search(context).groups()
            time.sleep(float(os.environ.get("PULSE_LM_DELAY", "0")))   # a model's compute time
            if _unit(self.seed, question) < self.skill:
                ll = 0.0 if continuation.strip() == str(int(a) + int(b)) else -1.0
            else:
                ll = -_unit(self.seed, question, continuation)
            # Counted before it is cached: a kill between the two can only make a count too high (the
            # request is computed again), never hide a computation behind lm-eval's cache.
            if log:
                with open(log, "a", encoding="utf-8") as handle:
                    handle.write(f"{self.seed} {question}\n")
            self.cache_hook.add_partial("loglikelihood", request.args, (ll, False))
            out.append((ll, False))
        return out

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError("the test model answers multiple-choice questions only")

    def generate_until(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError("the test model answers multiple-choice questions only")
