"""The stack outputs a client reads a deployment by: written by the stacks (constructs_lib/deployment/), read by the
commands (llmops/fleet_target.py). One home for both sides, stdlib only, so a light command does not load aws-cdk."""

# Every stack of an app outputs its app's name: names alone cannot tell app LlmEndpoint's stack for endpoint prod
# from app LlmEndpoint-prod's, both LlmEndpoint-prod.
APP_OUTPUT = "AppName"
