"""`orin-llm bench`: measured, side-by-side numbers. Every scenario writes <out>/<scenario>.json
(with the machine and the command) and, where a picture helps, <out>/<scenario>.png."""
