"""Business logic behind the routes; services take the session as a keyword and import no FastAPI."""
