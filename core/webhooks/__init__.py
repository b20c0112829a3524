"""Job webhooks: the callback URL's rules, the address guard, signing, the body, delivery."""
