"""Search: the candidates the registries allow (candidates.py), raced side by side
(race.py), and the winner with the reason every other candidate lost (decision.py)."""
