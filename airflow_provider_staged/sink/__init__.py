"""The unified sink (FLIP-143): ``api`` (pure), ``runtime`` (PySpark), the built-in sinks."""
