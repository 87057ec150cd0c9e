"""What the audit must find in the corpus: file -> [(rule id or audit note kind, line)].

Every file of ``corpus/`` is listed (an empty list is a tricky negative that must stay clean).
Notebook lines are lines inside a cell, written as (rule, line, cell).
"""

from __future__ import annotations

# Audited without --gpu: the GPU-dependent rules (bf16-unsupported, vram-overflow) stay silent.
EXPECTED: dict[str, list[tuple]] = {
    "batched_generate.py": [],  # range(0, n, BS) slicing, itertools.batched, all-at-once
    "bf16_dtype.py": [],  # bf16 is only a trap on a pre-Ampere GPU (see EXPECTED_T4)
    "comments_and_strings.py": [],  # the words only appear in comments, docstrings, strings
    "config_built_in_helper.py": [("int8-mixed", 6)],  # the fix goes where the helper builds it
    "config_helper_pure_int8.py": [],  # helper + module constant 0.0
    # the first config is dead (reassigned unread); the aliased one is live
    "config_overwritten_before_use.py": [("int8-mixed", 9)],
    "dataloader_default_batch.py": [("batch-size-one", 9)],  # DataLoader defaults to 1; 32 is fine
    "dict_config.py": [("int8-mixed", 5)],
    "fp8_compiled.py": [],  # torch.compile in the module
    "fp8_eager.py": [("fp8-eager", 5)],
    "fp8_regex_compile_only.py": [("fp8-eager", 10)],  # re.compile is not torch.compile
    "fp8_string_quant_type.py": [("fp8-eager", 7)],  # quant_type string via a constant
    "generate_comprehension.py": [("batch-size-one", 6)],
    "generate_helper_called_in_loop.py": [("batch-size-one", 9)],  # helper called from a loop
    "generate_loop.py": [("batch-size-one", 15)],
    "int8_default_config.py": [("int8-mixed", 7)],
    "int8_explicit_threshold_six.py": [("int8-mixed", 5)],
    "int8_threshold_constant.py": [],  # threshold 0.0 through a module constant
    "int8_threshold_constant_default.py": [("int8-mixed", 6)],  # 6.0 through two names
    "int8_threshold_from_env.py": [],  # unknowable threshold: silent, not guessed
    "int8_threshold_zero.py": [],
    "interactive_chat.py": [],  # input() loop: interactive, batching cannot help
    "kwargs_dict_unpacked.py": [("int8-mixed", 4)],  # config reached through **LOAD_KWARGS
    "large_model_nf4.py": [],  # 70B is far above the crossover
    "load_in_8bit_false.py": [],  # load_in_8bit=False through a constant
    "notebook_int8_loop.ipynb": [("batch-size-one", 3, 6), ("int8-mixed", 4, 3)],
    "old_style_load_in_4bit_small.py": [
        ("audit/transformers5-removed-kwarg", 3),
        ("small-model-quant", 3),
    ],
    "old_style_load_in_8bit.py": [("audit/transformers5-removed-kwarg", 4), ("int8-mixed", 4)],
    "pipeline_batched.py": [],  # a list with batch_size=16
    "pipeline_bs1_loop.py": [("batch-size-one", 9)],
    "queue_worker.py": [("batch-size-one", 14)],  # one request per generate, forever
    "shared_configs.py": [("int8-mixed", 6)],  # a preset never used here is still judged
    "small_model_nf4.py": [("small-model-quant", 9)],
    "threshold_set_after.py": [],  # config.llm_int8_threshold = 0.0 after construction
    "tokenizer_and_config_only.py": [],  # tokenizers and configs load no weights
    "torchao_quantize_direct.py": [("fp8-eager", 8)],
    "use_cache_false.py": [("audit/kv-cache-disabled", 6)],
    "use_cache_training.py": [],  # gradient checkpointing in a training script
    "vllm_bnb_small.py": [("small-model-quant", 3)],
    "vllm_fp8.py": [],  # vLLM's fp8 is not torchao's eager path
    "vram_70b_fp16.py": [],  # needs a GPU to judge (see EXPECTED_T4)
}

# The same files audited with --gpu T4 (Turing, 16 GB): only the files whose answer changes.
EXPECTED_T4: dict[str, list[tuple]] = {
    # Mistral 7.24B in 16-bit is ~14.5 GB of weights: over the ~14.4 GB usable on a T4 too.
    "bf16_dtype.py": [("bf16-unsupported", 4), ("vram-overflow", 4)],
    "vram_70b_fp16.py": [("vram-overflow", 4)],
    "large_model_nf4.py": [("vram-overflow", 10)],
    "small_model_nf4.py": [("small-model-quant", 9)],
    "int8_threshold_zero.py": [],  # 8B in int8 is ~8 GB: fits
}

# With --gpu A100 (Ampere, 80 GB): bf16 is native, 70B fp16 (141 GB) does not fit.
EXPECTED_A100: dict[str, list[tuple]] = {
    "bf16_dtype.py": [],
    "vram_70b_fp16.py": [("vram-overflow", 4)],
    "large_model_nf4.py": [],
}
