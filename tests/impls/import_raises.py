"""An implementation module that fails while being imported."""

raise RuntimeError("config file not found: ~/.myengine.toml")
