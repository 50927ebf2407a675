"""Samples that cost CPU time, prepared by a worker process (the fix, plot_dataloader)."""

import itertools

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

torch.set_num_threads(1)  # the model gets one thread, as on the page
torch.manual_seed(0)


class CostlySamples(Dataset):
    """Each sample costs a fraction of a millisecond of CPU work."""

    def __len__(self):
        return 4096

    def __getitem__(self, index):
        value = sum(range(index % 7, 5000)) % 5  # decoding, augmenting
        return torch.full((64,), float(value))


def make_loader():
    return DataLoader(
        CostlySamples(),
        batch_size=32,
        num_workers=1,
        prefetch_factor=4,
        persistent_workers=True,
        multiprocessing_context="fork",
    )


model = nn.Sequential(nn.Linear(64, 1024), nn.ReLU(), nn.Linear(1024, 1024))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
batches = itertools.chain.from_iterable(iter(make_loader, None))


def step():
    x = next(batches)
    loss = model(x).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
