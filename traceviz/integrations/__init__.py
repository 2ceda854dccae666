"""Integrations with training frameworks (torch and the framework are imported only when
their functions run)."""
