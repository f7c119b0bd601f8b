"""Shared pieces of the event-stream tests."""
import torch


class Stream:
    """Runs calls on a random stream of its own: two loops that both draw from torch's global
    generator (negatives, dropout) each get the state they would have alone."""

    def __init__(self, seed):
        torch.manual_seed(seed)
        self.state = torch.get_rng_state()

    def __call__(self, fn, *args):
        torch.set_rng_state(self.state)
        out = fn(*args)
        self.state = torch.get_rng_state()
        return out
