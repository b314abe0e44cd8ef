"""Clarification as policy: hidden-intent episodes scored by regret (`regret`) and Belief-Augmented Generation (`bag`).

`scenarios` holds the episode types and the registry (`products`, `ambigqa`), `user` the simulated user, `tracker`
the consistent-intent state, `planner` and `policies` who asks or answers, `episode` one dialogue, `text` and
`embed` the answer-matching and question-matching helpers, `model` the chat model under test, `stats` the statistics
both commands write into their summary.json.
"""
