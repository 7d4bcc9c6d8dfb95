"""The KU report's distributed pipeline (data_pipe) and its experiment files."""
