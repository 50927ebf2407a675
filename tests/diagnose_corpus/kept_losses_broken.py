"""An evaluation loop that keeps each loss (plot_kept_losses): without
``torch.no_grad`` the kept loss holds its graph, and the graph the activations."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256))
batch = torch.randn(128, 256)
losses = []


def step():
    loss = model(batch).pow(2).mean()
    losses.append(loss)
