import re

from torchao.quantization import Float8WeightOnlyConfig
from transformers import AutoModelForCausalLM, TorchAoConfig

STOP = re.compile(r"</s>|<\|eot_id\|>")  # re.compile is not torch.compile

model = AutoModelForCausalLM.from_pretrained(
    "meta-llama/Llama-3.1-8B-Instruct",
    quantization_config=TorchAoConfig(Float8WeightOnlyConfig()),
)
