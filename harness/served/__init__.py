"""Engine level: check a served engine from outside, over its OpenAI-compatible HTTP API.

serve     `specdec serve`: an OpenAI-compatible server around any §1b generate() (FastAPI + uvicorn)
client    bounded, retrying HTTP client with an on-disk, resumable record of every response
text      token <-> text for pairs without a tokenizer (toy pairs: the ids are the text)
tests     pure statistical pieces: coarsened PIT from top-k logprobs, two-sample homogeneity
check     `run_engine_check`: the engine as a trial source, tested against a ground truth a / b / c
probe     `specdec probe`: what a server returns and which ground truth that allows
cli       the `verify --level engine`, `serve` and `probe` subcommands
llamacpp  llama.cpp (llama-cpp-python's server) started and stopped by the harness
"""
