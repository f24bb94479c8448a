"""The engines and their servers: commands, vLLM's environment, starting/stopping, endpoints, llama.cpp by hand."""
