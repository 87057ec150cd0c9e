"""Token counting: per sequence up to and including the first EOS, no prompt, no padding."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from ecoguard.guard.tokens import count_generated, generated_lengths  # noqa: E402


def t(rows):
    return torch.tensor(rows)


@pytest.mark.parametrize(
    ("rows", "prompt", "eos", "pad", "expected"),
    [
        ([[5, 6, 7, 8, 9]], 2, 2, 0, [3]),  # no EOS, no padding: all new tokens
        ([[5, 6, 7, 2, 0, 0]], 2, 2, 0, [2]),  # EOS counted, padding after it not
        ([[5, 6, 2, 0, 0], [5, 6, 7, 8, 9]], 2, 2, 0, [1, 3]),
        ([[5, 6, 7, 2, 2, 2]], 2, 2, 2, [2]),  # pad == eos
        ([[5, 6, 7, 3, 9]], 2, [2, 3], 0, [2]),  # several EOS ids
        ([[5, 6, 7, 8, 0, 0]], 2, 2, 0, [2]),  # stopped without EOS (stop string): trailing pad
        ([[5, 6]], 2, 2, 0, [0]),  # nothing generated
        ([[7, 8, 2]], 0, None, None, [3]),  # output holds only new tokens; no EOS known
    ],
)
def test_generated_lengths(rows, prompt, eos, pad, expected):
    assert (
        generated_lengths(t(rows), prompt_length=prompt, eos_token_id=eos, pad_token_id=pad)
        == expected
    )


def test_count_accepts_generate_output():
    class Out:
        sequences = t([[1, 9, 2, 0], [1, 9, 9, 9]])

    assert (
        count_generated(Out(), prompt_length=1, eos_token_id=torch.tensor([2]), pad_token_id=0) == 5
    )


def test_rejects_non_tensor():
    with pytest.raises(TypeError):
        count_generated([[1, 2]], prompt_length=0)
