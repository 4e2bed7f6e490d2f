"""The language model: resolving a model spec to safetensors, prompt layout, scoring and prediction."""
