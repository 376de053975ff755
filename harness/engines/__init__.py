"""Engines behind one interface (harness.engines.base): adapters registered by name, listed by `specdec engines`,
checked by the generic battery (`specdec campaign engines --engine NAME`). docs/ENGINES-INTERFACE.md."""
