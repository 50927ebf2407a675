"""The fix that holds on a busy 2-core CPU (plot_dataloader, plot_loader_settings):
decode every sample once, before training, and fetch a batch at a time. Workers
need cores to spare beside the model, which a shared 2-core machine lacks."""

import itertools

import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, Dataset

torch.set_num_threads(1)  # the model gets one thread, as on the page
torch.manual_seed(0)


class CostlySamples(Dataset):
    """Each sample costs a fraction of a millisecond of CPU work."""

    def __len__(self):
        return 4096

    def __getitem__(self, index):
        value = sum(range(index % 7, 5000)) % 5  # decoding, augmenting
        return torch.full((64,), float(value))


samples = CostlySamples()
prepared = torch.stack([samples[i] for i in range(len(samples))])  # once


def make_loader():
    # the tensor is the dataset: each fetch indexes it with a whole batch's indices
    batches = BatchSampler(range(len(prepared)), batch_size=32, drop_last=False)
    return DataLoader(prepared, sampler=batches, batch_size=None)


model = nn.Sequential(nn.Linear(64, 1024), nn.ReLU(), nn.Linear(1024, 1024))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
batches = itertools.chain.from_iterable(iter(make_loader, None))


def step():
    x = next(batches)
    loss = model(x).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
