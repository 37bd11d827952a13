"""The demo's model trains, with and without its FP8 layer (CPU kernels; the attention encoder of
the item history included)."""
import pytest
import torch

from mymetaops import demo


@pytest.mark.parametrize("fp8", [False, True])
def test_demo_model_trains(fp8):
    torch.manual_seed(0)
    model = demo.ToyRecsys(fp8)
    dense, sparse, history, clicks = demo.synthetic_batch(64, torch.Generator().manual_seed(0), torch.device("cpu"))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for _ in range(5):
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(dense, sparse, history), clicks)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    assert model.top[0].__class__.__name__ == ("Bf16Fp8Linear" if fp8 else "Linear")
