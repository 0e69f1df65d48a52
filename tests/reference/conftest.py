"""Reference-decoder tests share a small CPU with the rest of the suite: one torch thread."""

import torch

torch.set_num_threads(1)
