"""The experiment file: its model, its schema and checks, the loader, campaigns' sections."""
