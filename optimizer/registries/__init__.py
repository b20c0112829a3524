"""What backends and precisions exist and what each supports: the vocabulary (`Backend`, `Precision`)
and their specs. Standard library only: importing them loads no backend.
"""
