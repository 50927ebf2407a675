"""gpuguide: the helpers behind an executable guide to making PyTorch fast on GPUs."""

__version__ = "0.1.0"
