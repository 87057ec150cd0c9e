from transformers import AutoModelForCausalLM, TorchAoConfig

QUANT_TYPE = "float8_dynamic_activation_float8_weight"


def load(model_id: str):
    config = TorchAoConfig(quant_type=QUANT_TYPE)
    return AutoModelForCausalLM.from_pretrained(model_id, quantization_config=config)
