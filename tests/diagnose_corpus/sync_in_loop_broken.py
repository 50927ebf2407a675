"""A training step that reads its loss back every step (plot_sync_in_loop)."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 4096)).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
batch = torch.randn(2048, 4096, device="cuda")
history = []


def step():
    for _ in range(4):
        loss = model(batch).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        history.append(loss.item())  # waits for the GPU
