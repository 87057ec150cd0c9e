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


# -- property tests: the host-side counter against the rule, and against the tensor version ----

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def rule_lengths(rows, prompt, eos, pad):
    """The counting rule, spelled out one token at a time."""
    eos_ids = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    lengths = []
    for row in rows:
        new = row[prompt:]
        length = None
        for position, token in enumerate(new):
            if token in eos_ids:
                length = position + 1
                break
        if length is None:
            length = len(new)
            while pad is not None and length and new[length - 1] == pad:
                length -= 1
        lengths.append(length)
    return lengths


def tensor_lengths(sequences, prompt, eos, pad):
    """The counter as it was before issue 31: vectorised torch operations on the tensor."""
    generated = sequences[:, prompt:]
    rows, width = generated.shape
    if rows == 0:
        return []
    if width == 0:
        return [0] * rows
    lengths = torch.full((rows,), width, dtype=torch.long)
    has_eos = torch.zeros(rows, dtype=torch.bool)
    eos_ids = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    if eos_ids:
        is_eos = torch.isin(generated, torch.tensor(eos_ids, dtype=generated.dtype))
        has_eos = is_eos.any(dim=1)
        first_eos = is_eos.to(torch.int8).argmax(dim=1)
        lengths = torch.where(has_eos, first_eos + 1, lengths)
    if pad is not None:
        not_pad = generated != pad
        any_real = not_pad.any(dim=1)
        last_real = width - not_pad.flip(dims=(1,)).to(torch.int8).argmax(dim=1)
        trimmed = torch.where(any_real, last_real, torch.zeros_like(last_real))
        lengths = torch.where(has_eos, lengths, trimmed)
    return [int(value) for value in lengths.tolist()]


@st.composite
def generate_outputs(draw):
    """A batch as generate leaves it: a (left-padded) prompt, then new tokens in which each row
    may stop at EOS at any position (padding after it), stop early on padding, or run on."""
    rows = draw(st.integers(0, 5))
    prompt = draw(st.integers(0, 4))
    width = draw(st.integers(0, 9))
    eos = draw(st.one_of(st.none(), st.integers(0, 3), st.lists(st.integers(0, 3), max_size=3)))
    pad = draw(st.one_of(st.none(), st.integers(0, 3)))
    token = st.integers(0, 5)  # a small vocabulary: EOS and pad ids also occur as plain tokens
    batch = []
    for _ in range(rows):
        new = draw(st.lists(token, min_size=width, max_size=width))
        stop = draw(st.one_of(st.none(), st.integers(0, max(0, width - 1))))
        if stop is not None and width and pad is not None:
            filler = pad
            if eos is not None and draw(st.booleans()):
                new[stop] = eos if isinstance(eos, int) else (eos or [pad])[0]
                stop += 1
            new[stop:] = [filler] * (width - stop)
        batch.append(draw(st.lists(token, min_size=prompt, max_size=prompt)) + new)
    return batch, prompt, eos, pad


@settings(max_examples=400, deadline=None)
@given(generate_outputs())
def test_counter_matches_the_rule_and_the_tensor_version(case):
    rows, prompt, eos, pad = case
    width = prompt + (len(rows[0]) - prompt if rows else 0)
    sequences = torch.tensor(rows, dtype=torch.long).reshape(len(rows), width)
    lengths = generated_lengths(sequences, prompt_length=prompt, eos_token_id=eos, pad_token_id=pad)
    assert lengths == rule_lengths(rows, prompt, eos, pad)
    assert lengths == tensor_lengths(sequences, prompt, eos, pad)
    assert count_generated(
        sequences, prompt_length=prompt, eos_token_id=eos, pad_token_id=pad
    ) == sum(lengths)


@settings(max_examples=100, deadline=None)
@given(generate_outputs())
def test_eos_and_pad_as_tensors_count_alike(case):
    rows, prompt, eos, pad = case
    if not rows or eos is None or pad is None:
        return
    sequences = torch.tensor(rows)
    as_ints = generated_lengths(sequences, prompt_length=prompt, eos_token_id=eos, pad_token_id=pad)
    as_tensors = generated_lengths(
        sequences,
        prompt_length=prompt,
        eos_token_id=torch.tensor(eos),
        pad_token_id=torch.tensor(pad),
    )
    assert as_tensors == as_ints


def test_eos_at_every_position():
    width = 6
    for position in range(width):
        new = [7] * width
        new[position] = 2
        new[position + 1 :] = [0] * (width - position - 1)
        rows = t([[9, 9, *new], [9, 9, *([7] * width)]])
        assert generated_lengths(rows, prompt_length=2, eos_token_id=2, pad_token_id=0) == [
            position + 1,
            width,
        ]
