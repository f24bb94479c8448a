"""The model layer: model shapes, stand-ins, synthetic and HF-format models, weight sizes and quantization."""
