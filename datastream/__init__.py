"""The datastream file format in one place (docs/stream-format.md): its constants and chunk
framing (format), the writer node processes log through (writer), and the reader that
yields a file's chunks as columns (columns, compiled) or its records one by one (reader)."""
