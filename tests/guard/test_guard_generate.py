"""generate under the guard: same outputs, meter hook, depth guard, batch-size-one, fail-open."""

from __future__ import annotations

import warnings

import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from transformers import AutoModelForCausalLM  # noqa: E402

from ecoguard.energy.reference import configuration  # noqa: E402
from ecoguard.errors import EnergyTrapWarning  # noqa: E402
from ecoguard.faults import fault_counts  # noqa: E402
from ecoguard.guard import wrappers  # noqa: E402
from ecoguard.guard.install import install, uninstall  # noqa: E402
from ecoguard.guard.tokens import count_generated  # noqa: E402
from ecoguard.rules import BS1_SUSTAINED_CALLS  # noqa: E402


def sample(model, **kw):
    torch.manual_seed(1234)
    ids = torch.tensor([[1, 5, 6, 7], [0, 1, 9, 10]])
    mask = torch.tensor([[1, 1, 1, 1], [0, 1, 1, 1]])
    return model.generate(
        input_ids=ids, attention_mask=mask, do_sample=True, max_new_tokens=6, **kw
    )


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_guarded_output_equals_unguarded(family, tiny_llama_dir, tiny_qwen2_dir):
    path = tiny_llama_dir if family == "llama" else tiny_qwen2_dir
    model = AutoModelForCausalLM.from_pretrained(path)
    plain = sample(model)
    install(mode="warn", measure=False)
    guarded = sample(model)
    assert torch.equal(plain, guarded)


def test_meter_hook_counts_tokens_once(tiny_llama_dir, fake_meter):
    install(mode="warn", measure=False)
    meter = fake_meter()
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    out = sample(model)
    assert len(meter.begins) == len(meter.ends) == 1
    info = meter.begins[0]["info"]
    assert (info.batch_size, info.max_new_tokens, info.prompt_tokens) == (2, 6, 3)
    # The model's one deployment object, not a copy per call: the meter applies the call's
    # batch and prompt to it for the reference J/token.
    assert info.model_name and info.deployment is wrappers.RUNTIME.models[model].deployment
    reference_config = configuration(info, [])
    assert (reference_config.batch_size, reference_config.prompt_tokens) == (2, 16)
    assert meter.begins[0]["devices"] is None  # CPU: the meter picks
    expected = count_generated(out, prompt_length=4, eos_token_id=2, pad_token_id=0)
    assert meter.ends[0]["tokens"] == expected and meter.ends[0]["requests"] == 2


def test_meter_end_gets_the_error(tiny_llama_dir, fake_meter):
    install(mode="warn", measure=False)
    meter = fake_meter()
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    with pytest.raises(IndexError):
        model.generate(input_ids=torch.tensor([[1, 999999]]), max_new_tokens=2)
    assert len(meter.ends) == 1 and meter.ends[0]["error"] is not None


def test_assisted_decoding_counts_once(tiny_llama_dir, fake_meter):
    install(mode="warn", measure=False)
    meter = fake_meter()
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    assistant = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    model.generate(
        input_ids=torch.tensor([[1, 5, 6, 7]]),
        assistant_model=assistant,
        max_new_tokens=5,
        do_sample=False,
    )
    assert len(meter.begins) == 1 and len(meter.ends) == 1


def _tiny_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, 256)}}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<pad>",
    )


def test_pipeline_is_covered_through_generate(tiny_llama_dir, fake_meter):
    install(mode="warn", measure=False)
    meter = fake_meter()
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    generator = transformers.pipeline("text-generation", model=model, tokenizer=_tiny_tokenizer())
    result = generator("w5 w6 w7", max_new_tokens=4, do_sample=False)
    assert result and "generated_text" in result[0]
    assert len(meter.begins) == 1 and meter.begins[0]["info"].batch_size == 1


def test_batch_size_one_needs_a_sustained_streak(tiny_llama_dir, captured_events, monkeypatch):
    monkeypatch.setattr(wrappers, "is_interactive", lambda: False)
    install(mode="warn", measure=False)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    one = torch.tensor([[1, 5, 6]])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(BS1_SUSTAINED_CALLS - 1):
            model.generate(one, max_new_tokens=1)
        model.generate(torch.tensor([[1, 5, 6], [1, 7, 8]]), max_new_tokens=1)  # breaks the streak
        for _ in range(BS1_SUSTAINED_CALLS - 1):
            model.generate(one, max_new_tokens=1)
        assert not [w for w in caught if issubclass(w.category, EnergyTrapWarning)]
        for _ in range(BS1_SUSTAINED_CALLS * 2 + 1):  # a second full streak at the same site
            model.generate(one, max_new_tokens=1)
    ours = [w for w in caught if issubclass(w.category, EnergyTrapWarning)]
    assert len(ours) == 1 and "batch-size-one" in str(ours[0].message)
    assert [e.finding.rule for e in captured_events] == ["batch-size-one"]
    assert captured_events[0].source == "generate"


def test_batch_size_one_is_quiet_when_interactive(tiny_llama_dir, captured_events, monkeypatch):
    monkeypatch.setattr(wrappers, "is_interactive", lambda: True)
    install(mode="warn", measure=False)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    for _ in range(BS1_SUSTAINED_CALLS + 1):
        model.generate(torch.tensor([[1, 5]]), max_new_tokens=1)
    assert captured_events == []


def test_model_loaded_before_install_is_judged_at_generate(tiny_llama_dir, captured_events):
    from transformers import BitsAndBytesConfig

    model = AutoModelForCausalLM.from_pretrained(
        tiny_llama_dir, quantization_config=BitsAndBytesConfig(load_in_8bit=True)
    )
    install(mode="fix", rules="small-model-quant:off", measure=False)
    model.generate(torch.tensor([[1, 5]]), max_new_tokens=1)
    (event,) = captured_events
    assert (event.finding.rule, event.source, event.action) == ("int8-mixed", "generate", "fix")
    assert {m.state.threshold for m in model.modules() if type(m).__name__ == "Linear8bitLt"} == {
        0.0
    }


def test_batching_hook_routes_through_coalescing(tiny_llama_dir):
    install(mode="warn", measure=False, batching=True)
    seen = []

    def spy(wrapped, model, args, kwargs, settings):
        seen.append((model, settings.batching))
        return wrapped(*args, **kwargs)

    wrappers.RUNTIME.coalesce = spy
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    model.generate(torch.tensor([[1, 5]]), max_new_tokens=1)
    assert seen == [(model, True)]


def test_fail_open_generate(tiny_llama_dir, fake_meter, monkeypatch):
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    plain = sample(model)
    install(mode="strict", measure=False)
    meter = fake_meter()

    def boom(*args, **kwargs):
        raise RuntimeError("injected")

    monkeypatch.setattr(wrappers, "_track_batch_size", boom)
    monkeypatch.setattr(meter, "begin", boom)
    monkeypatch.setattr(meter, "end", boom)
    guarded = sample(model)  # two rows: the streak is reset inline; the meter's begin raises
    assert torch.equal(plain, guarded)
    # One row reaches _track_batch_size, which raises: counted, and the call still runs.
    assert model.generate(torch.tensor([[1, 5]]), max_new_tokens=1).shape == (1, 3)
    faults = fault_counts()
    assert faults["guard.generate"] == 1 and faults["guard.meter.begin"] == 2
    # A model whose facts cannot be read at all still runs untouched.
    monkeypatch.setattr(wrappers.extract, "facts_from_model", boom)
    wrappers.RUNTIME.models.clear()
    assert torch.equal(sample(model), plain)
    assert fault_counts()["guard.generate"] == 2
    uninstall()
    assert torch.equal(sample(model), plain)


def test_model_devices_walked_once_per_model_not_per_call(tiny_llama_dir, fake_meter, monkeypatch):
    from ecoguard.guard import extract

    walks: list[object] = []
    real_model_devices = extract.model_devices

    def spy(model):
        walks.append(model)
        return real_model_devices(model)

    monkeypatch.setattr(extract, "model_devices", spy)
    install(mode="warn", measure=False)
    meter = fake_meter()
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    for _ in range(4):
        model.generate(torch.tensor([[1, 5], [1, 6]]), max_new_tokens=1)
    assert len(walks) == 1
    assert [begin["devices"] for begin in meter.begins] == [None] * 4
    # A new device map (e.g. after dispatching the model again) is seen on the next call.
    model.hf_device_map = {"": 0}
    model.generate(torch.tensor([[1, 5], [1, 6]]), max_new_tokens=1)
    assert len(walks) == 2 and meter.begins[-1]["devices"] == (0,)
    model.generate(torch.tensor([[1, 5], [1, 6]]), max_new_tokens=1)
    assert len(walks) == 2 and meter.begins[-1]["devices"] == (0,)


def test_meter_with_no_gpu_opens_no_window(tiny_llama_dir, fake_meter, monkeypatch):
    from ecoguard.guard import extract

    extracted: list[object] = []
    real_facts = extract.facts_from_generate
    monkeypatch.setattr(
        extract,
        "facts_from_generate",
        lambda *a, **k: extracted.append(a) or real_facts(*a, **k),
    )
    install(mode="warn", measure=False)
    meter = fake_meter(tracks=[])  # a meter with no GPU backend: nothing to measure
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    plain = sample(model)
    assert meter.begins == [] and meter.ends == [] and extracted == []
    uninstall()
    assert torch.equal(plain, sample(model))
