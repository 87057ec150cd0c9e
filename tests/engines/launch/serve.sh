#!/usr/bin/env bash
# Start the chat model for the support bot.
set -euo pipefail
export VLLM_CPU_KVCACHE_SPACE=4

MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct-AWQ}
echo "starting $MODEL"

CUDA_VISIBLE_DEVICES=0 exec vllm serve Qwen/Qwen2.5-0.5B-Instruct-AWQ \
    --host 0.0.0.0 --port 8000 \
    --quantization awq \
    --max-model-len 4096 \
    --max-num-seqs 1 &

# a second, healthy server: no trap
python3 -m vllm.entrypoints.openai.api_server --model meta-llama/Llama-3.1-8B-Instruct --dtype bfloat16 --max-num-seqs 128
wait
