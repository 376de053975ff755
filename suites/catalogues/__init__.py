"""Case catalogues: what the checks run when the user names no cases, settings or prompts."""
