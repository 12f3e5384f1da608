from . import schema_markdown

print(schema_markdown(), end="")
