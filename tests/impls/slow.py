"""A correct verify step that takes a while per call: a run long enough for its progress lines to show."""

import time

from specdec_ref.verify import verify_step

CALL_S = 0.03


def verify(target_probs, draft_probs, draft_tokens, generator):
    time.sleep(CALL_S)
    return verify_step(target_probs, draft_probs, draft_tokens, generator).tokens


def interrupt(target_probs, draft_probs, draft_tokens, generator):
    """The user's Ctrl-C, arriving while the implementation runs."""
    raise KeyboardInterrupt
