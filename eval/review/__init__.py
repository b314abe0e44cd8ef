"""`fic review`: the blind manual-review web app for validating follow-up judges (see `fic.eval.review.server`)."""
