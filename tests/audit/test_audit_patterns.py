"""Issue 16: the shapes real code takes, one behaviour per test (the corpus holds whole files)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from ecoguard.audit import audit_paths, audit_source
from ecoguard.audit.moe import moe_total_b
from ecoguard.audit.render import render_text
from ecoguard.rules import BS1_SUSTAINED_CALLS

CORPUS = Path(__file__).parent / "corpus"

HEAD = """\
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline
tok = AutoTokenizer.from_pretrained("meta-llama/Llama-3.1-8B-Instruct")
model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.1-8B-Instruct")
"""


def _audit(body: str, gpu: str | None = None):
    return audit_source(HEAD + textwrap.dedent(body), "snippet.py", gpu=gpu)


def _rules(result) -> list[tuple[str, int]]:
    items = [(f.rule, f.location.line) for f in result.findings]
    items += [(n.kind, n.location.line) for n in result.notes]
    return sorted(items)


# -- batch-size-one -------------------------------------------------------------------------


def test_static_message_says_what_the_code_shows_not_what_ran():
    (finding,) = audit_paths([CORPUS / "generate_loop.py"]).findings
    assert "consecutive generate calls ran" not in finding.message
    assert "once per item of `questions` (the for loop at line 13)" in finding.message
    details = dict(finding.details)
    assert "consecutive_bs1_calls" not in details
    assert details["loop_line"] == 13 and details["loop_kind"] == "for"
    assert details["loop_over"] == "questions" and details["loop_items"] is None


def test_literal_list_count_is_in_the_message_and_details():
    (finding,) = audit_paths([CORPUS / "literal_prompt_lists.py"]).findings
    assert "(the for loop at line 32, 10 items)" in finding.message
    assert dict(finding.details)["loop_items"] == 10


@pytest.mark.parametrize("count", [2, BS1_SUSTAINED_CALLS - 1])
def test_fewer_literal_prompts_than_the_rule_needs_stay_silent(count):
    prompts = ", ".join(f'"p{i}"' for i in range(count))
    result = _audit(f"for p in [{prompts}]:\n    model.generate(**tok(p, return_tensors='pt'))\n")
    assert result.findings == []
    result = _audit(
        f"for _ in range({count}):\n    model.generate(**tok('x', return_tensors='pt'))\n"
    )
    assert result.findings == []


def test_as_many_literal_prompts_as_the_rule_needs_are_reported():
    prompts = ", ".join(f'"p{i}"' for i in range(BS1_SUSTAINED_CALLS))
    result = _audit(f"for p in [{prompts}]:\n    model.generate(**tok(p, return_tensors='pt'))\n")
    assert _rules(result) == [("batch-size-one", 5)]


def test_builtin_map_and_datasets_map_call_the_helper_per_item():
    body = """\
    def answer(q):
        return model.generate(**tok(q, return_tensors="pt"))
    def main(questions):
        return list(map(answer, questions))
    """
    result = _audit(body)
    (finding,) = result.findings
    assert finding.location.line == 5
    assert dict(finding.details)["loop_kind"] == "map"
    assert "generate (in `answer`)" in finding.message


def test_datasets_map_batched_hands_the_helper_batches():
    body = """\
    def answer(rows):
        return {"out": model.generate(**tok(rows["q"], return_tensors="pt", padding=True))}
    def per_row(row):
        return {"out": model.generate(**tok(row["q"], return_tensors="pt"))}
    def main(ds):
        ds.map(answer, batched=True, batch_size=32)
        ds.map(per_row)
    """
    assert _rules(_audit(body)) == [("batch-size-one", 7)]  # per_row's generate


def test_range_step_default_one_without_callers_and_keyword_only():
    body = """\
    def run(prompts, *, batch_size=1):
        for i in range(0, len(prompts), batch_size):
            chunk = prompts[i : i + batch_size]
            model.generate(**tok(chunk, return_tensors="pt", padding=True))
    """
    (finding,) = _audit(body).findings
    assert "whose step `batch_size` is 1 where it is called" in finding.message


def test_range_step_mixed_callers_is_given_the_benefit_of_the_doubt():
    body = """\
    def run(prompts, batch_size=1):
        for i in range(0, len(prompts), batch_size):
            model.generate(**tok(prompts[i : i + batch_size], return_tensors="pt", padding=True))
    run(["a"], batch_size=1)
    run(["b"], batch_size=16)
    """
    assert _audit(body).findings == []


def test_pipeline_over_a_small_literal_list_is_silent_and_a_long_one_is_not():
    small = 'pipe = pipeline("text-generation", model="gpt2")\npipe(["a", "b", "c"])\n'
    assert _audit(small).findings == []
    prompts = ", ".join(f'"p{i}"' for i in range(12))
    long = f'pipe = pipeline("text-generation", model="gpt2")\npipe([{prompts}])\n'
    (finding,) = _audit(long).findings
    assert "runs over" in finding.message and "(12 items)" in finding.message
    assert "batch_size left at its default of 1" in finding.message
    assert finding.fix.startswith("pipe([") and "batch_size=16" in finding.fix


def test_pipeline_column_of_a_loaded_dataset():
    body = """\
    from datasets import load_dataset
    ds = load_dataset("imdb", split="test")
    clf = pipeline("text-generation", model="gpt2")
    outs = clf(ds["text"], max_new_tokens=8)
    single = clf("one prompt")
    """
    assert _rules(_audit(body)) == [("batch-size-one", 7)]


def test_text_output_shows_the_loop_line_and_json_keeps_loop_line():
    result = audit_paths([CORPUS / "generate_loop.py"])
    text = render_text(result)
    assert "loop: line 13 (for over `questions`)" in text
    assert result.findings[0].to_dict()["details"]["loop_line"] == 13


def test_notebook_loop_line_is_counted_inside_its_cell():
    result = audit_paths([CORPUS / "notebook_int8_loop.ipynb"])
    bs1 = next(f for f in result.findings if f.rule == "batch-size-one")
    details = dict(bs1.details)
    assert (details["loop_cell"], details["loop_line"]) == (6, 2)
    assert "(the for loop at cell 6, line 2)" in bs1.message
    assert "loop: cell 6, line 2" in render_text(result)


# -- quantization ---------------------------------------------------------------------------


def test_small_model_fix_names_the_call_the_code_used():
    (pipe,) = audit_paths([CORPUS / "pipeline_small_model_4bit.py"]).findings
    # the file's own call and model argument (issue 33: no names the file does not have)
    assert pipe.fix.startswith(
        'pipeline("text-generation", model="Qwen/Qwen2.5-0.5B-Instruct", dtype='
    )
    assert "from_pretrained" not in pipe.fix
    vllm = audit_paths([CORPUS / "vllm_awq_gptq_small.py"]).findings
    # an AWQ/GPTQ checkpoint's 16-bit original is not in the file: a marked slot
    assert vllm and all(f.fix.startswith('LLM(model="<16-bit model id>", dtype=') for f in vllm)
    (loaded,) = audit_paths([CORPUS / "awq_config_small.py"]).findings
    assert loaded.fix.startswith('AutoModelForCausalLM.from_pretrained("<16-bit model id>",')


def test_gptq_config_with_eight_bits_is_judged_as_pure_int8():
    body = """\
    from transformers import GPTQConfig
    m = AutoModelForCausalLM.from_pretrained(
        "Qwen/Qwen2.5-0.5B-Instruct", quantization_config=GPTQConfig(bits=8)
    )
    """
    (finding,) = _audit(body).findings
    assert finding.rule == "small-model-quant" and "int8_pure" in finding.message


def test_from_quantized_of_an_unknown_library_and_name_is_not_guessed():
    body = """\
    from mylib import Loader
    m = Loader.from_quantized("some/checkpoint")
    """
    assert _audit(body).findings == []


def test_fp8_in_a_dict_comprehension_needs_compile_too():
    text = (CORPUS / "fp8_module_fqn_mapping.py").read_text()
    compiled = audit_source(text + "model = torch.compile(model)\n", "c.py")
    assert compiled.findings == []


# -- notes ----------------------------------------------------------------------------------


def test_generate_with_the_cache_off_is_noted_even_in_a_training_script():
    body = """\
    from transformers import Trainer
    trainer = Trainer(model=model)
    trainer.train()
    sample = model.generate(**tok("hi", return_tensors="pt"), use_cache=False)
    """
    assert _rules(_audit(body)) == [("audit/kv-cache-disabled", 7)]


def test_removed_kwarg_still_noted_for_transformers_and_unknown_values():
    body = """\
    import os
    a = AutoModelForCausalLM.from_pretrained("gpt2", load_in_8bit=os.environ.get("INT8"))
    """
    assert ("audit/transformers5-removed-kwarg", 5) in _rules(_audit(body))


# -- with a GPU -----------------------------------------------------------------------------


def test_torchao_int4_that_does_not_fit_is_priced_and_named_as_int4():
    body = """\
    from transformers import TorchAoConfig
    m = AutoModelForCausalLM.from_pretrained(
        "meta-llama/Llama-3.1-70B-Instruct",
        quantization_config=TorchAoConfig("int4_weight_only", group_size=128),
    )
    """
    found = _audit(body, gpu="T4").findings
    (finding,) = [f for f in found if f.rule == "vram-overflow" and f.location.line == 5]
    assert "of int4 weights" in finding.message and "nf4" not in finding.message
    details = dict(finding.details)
    assert 35 < details["weights_gb"] < 40  # ~70.6B x ~0.53 B, not x 2 B
    assert "(int4)" in details["vram_method"]


def test_moe_models_are_sized_by_total_parameters():
    result = audit_paths([CORPUS / "moe_llama4_scout.py"], gpu="A100")
    (finding,) = result.findings
    assert dict(finding.details)["weights_gb"] == pytest.approx(218.0)
    assert moe_total_b("Qwen/Qwen3-30B-A3B") == (None, False)  # the name states the total
    assert moe_total_b("allenai/OLMoE-1B-7B-0924") == (None, False)
    assert moe_total_b("acme/Frontier-MoE-9B") == (None, True)  # an MoE of unknown total


def test_an_moe_of_unknown_total_gets_no_size_rather_than_its_active_count():
    body = 'm = AutoModelForCausalLM.from_pretrained("acme/Frontier-MoE-9B-16E", dtype="float16")\n'
    assert [f.location.line for f in _audit(body, gpu="T4").findings] == [3]  # only HEAD's 8B


def test_json_output_of_the_whole_corpus_is_valid(tmp_path):
    from ecoguard.audit.render import render_json

    data = json.loads(render_json(audit_paths([CORPUS])))
    bs1 = [f for f in data["findings"] if f["rule"] == "batch-size-one"]
    assert bs1 and all("consecutive generate calls" not in f["message"] for f in bs1)


# -- engines and servers in Python ----------------------------------------------------------


def test_vllm_max_num_seqs_one_in_python_is_worded_as_the_keyword():
    text = 'from vllm import LLM\nllm = LLM(model="meta-llama/Llama-3.1-8B-Instruct", max_num_seqs=1)\n'
    (finding,) = audit_source(text, "v.py").findings
    assert finding.rule == "batch-size-one" and finding.location.line == 2
    assert finding.message.startswith("LLM(max_num_seqs=1) lets the engine run one sequence")
    assert finding.fix.startswith("LLM(..., max_num_seqs=256)")


def test_sglang_engine_keywords_go_through_the_engine_mapping():
    text = (
        "import sglang as sgl\n"
        'e = sgl.Engine(model_path="Qwen/Qwen2.5-0.5B-Instruct", quantization="gptq")\n'
        'big = sgl.Engine(model_path="meta-llama/Llama-3.1-70B-Instruct", tp_size=2)\n'
        "from mylib import Engine\n"
        'other = Engine(model_path="Qwen/Qwen2.5-0.5B-Instruct", quantization="gptq")\n'
    )
    (finding,) = audit_source(text, "s.py").findings
    assert (finding.rule, finding.location.line) == ("small-model-quant", 2)
    assert finding.fix.startswith('Engine(model_path="Qwen/Qwen2.5-0.5B-Instruct", dtype="')
    overflow = audit_source(text, "s.py", gpu="A100").findings
    # 70B in 16-bit over two 80 GB GPUs fits: tp_size is read
    assert all(f.rule != "vram-overflow" for f in overflow)


def test_a_flask_route_generating_per_request_is_batch_size_one():
    body = """\
    from flask import Flask, request
    app = Flask(__name__)
    @app.route("/complete", methods=["POST"])
    def complete():
        return {"out": model.generate(**tok(request.json["prompt"], return_tensors="pt"))}
    def not_a_route(prompt):
        return model.generate(**tok(prompt, return_tensors="pt"))
    """
    (finding,) = _audit(body).findings
    assert finding.location.line == 8
    assert "once per request to the web route declared at line 6" in finding.message
    assert "loop: line 6 (handler)" in render_text(audit_source(HEAD + textwrap.dedent(body)))


def test_a_worker_draining_its_queue_into_one_call_is_batched():
    body = """\
    import queue
    q = queue.Queue()
    def worker():
        while True:
            pending = [q.get()]
            while not q.empty() and len(pending) < 16:
                pending.append(q.get_nowait())
            model.generate(**tok(pending, return_tensors="pt", padding=True))
    def streamer(prompts):
        while prompts:
            ids = model.generate(**tok(prompts.pop(), return_tensors="pt"))
            pieces = []
            for piece in ids:
                pieces.append(piece)
    """
    # the drain makes the worker's turns batches; appending output pieces does not
    assert _rules(_audit(body)) == [("batch-size-one", 14)]  # the streamer's generate
