"""``EndpointSmokeTest``: a deployment is done when the model answers, not when the endpoint exists.

A ``Custom::EndpointSmokeTest`` resource, served by ``lambda/endpoint_smoke_test`` through the stack's
one ``HandlerProvider``, runs after the endpoint: it checks that the endpoint is ``InService`` on the
config this deployment created (a silent rollback fails it), asks for a chat completion, whole and
streamed, and fails the stack with the status code, the first bytes of the error body and the log group
to open when the model does not answer. CloudFormation then rolls back: a new stack is removed, an
update returns to the last configuration that passed.

It runs again whenever one of its properties changes, and ``fingerprint`` makes the model's, the
endpoint config's and the component's CloudFormation properties part of them, so a new image, instance
type or environment re-runs it even when no name changes.

With ``load`` (a :class:`~constructs_lib.load_gate.LoadGate`), the answer check is followed by a burst of streamed
requests whose latency and throughput must meet the gate's targets; the figures are the resource's attributes
(``load_figure``) and CloudWatch metrics (namespace ``LlmEndpoint/SmokeTest``, dimension ``Deployment``). Without
it, the template is what it was before the gate existed.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import aws_cdk as cdk
import jsii
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct, IConstruct, IDependable

from endpoint_client.streams import STREAM_FORMATS
from handler_kit.resources import (
    LOAD_FIGURES,
    SMOKE_METRIC_DIMENSION,
    SMOKE_METRIC_NAMESPACE,
    SMOKE_OUTPUT_EXTENSION,
    EndpointSmokeTestProperties,
)

from .load_gate import GATE_HANDLER_TIMEOUT, LoadGate, load_gate_problems
from .nag import acknowledge_wildcard
from .problems import construct_subject, refuse
from .provider import HandlerProvider

if TYPE_CHECKING:
    from .async_inference import AsyncQueue
    from .gpu_endpoint import GpuEndpoint
    from .inference_component import InferenceComponent

RESOURCE_TYPE = "Custom::EndpointSmokeTest"
PROVIDER_ID = "EndpointSmokeTestProvider"
# A child of the provider once its role may PutMetricData for the gates (several gates share one statement).
_METRICS_GRANTED = "SmokeMetricsGranted"
DEFAULT_PROMPT = "In one short sentence: what is Amazon S3?"
# The resource's own defaults (handler_kit/resources.py), the ones its handler falls back to.
_DEFAULT = EndpointSmokeTestProperties(endpoint_name="", endpoint_config_name="", prompt=DEFAULT_PROMPT)
BUDGET_RANGE_S = (60, 2700)  # 1 to 45 minutes: CloudFormation waits at most an hour for a custom resource
MIN_BUDGET = cdk.Duration.seconds(BUDGET_RANGE_S[0])
MAX_BUDGET = cdk.Duration.seconds(BUDGET_RANGE_S[1])
# One handler run: two describes and two model calls of at most 90 s each, with room to spare.
HANDLER_TIMEOUT = cdk.Duration.minutes(5)
QUERY_INTERVAL = cdk.Duration.seconds(20)
# The waiter outlives the longest budget: the handler, not the waiter, decides when time is up, so
# the failure carries the handler's reason rather than "Operation timed out".
TOTAL_TIMEOUT = cdk.Duration.minutes(MAX_BUDGET.to_minutes() + HANDLER_TIMEOUT.to_minutes() + 2)
# CloudFormation's own limit for this resource: the budget, one more handler run past it, a poll.
SERVICE_TIMEOUT_MARGIN = cdk.Duration.minutes(8)
RESERVED_BODY_KEYS = ("messages", "stream")
# How the construct's refusals name the gate's fields: load.<field>, and the budget prop.
_LOAD_PROP_NAMES = {
    **{f: f"load.{f}" for f in ("concurrency", "requests", "max_tokens", "ttft_p95_ms", "itl_p95_ms")},
    "min_output_tokens_per_s": "load.min_output_tokens_per_s",
    "max_error_rate": "load.max_error_rate",
    "budget": "budget",
}


def _endpoint_props(endpoint: Any) -> dict[str, str]:
    """What the smoke test needs of the endpoint it invokes (a GpuEndpoint's or a component's)."""
    return {
        "endpoint_name": endpoint.endpoint_name,
        "endpoint_config_name": endpoint.endpoint_config.attr_endpoint_config_name,
        "endpoint_arn": endpoint.endpoint_arn,
    }


# Waking an asynchronous endpoint from zero: the wake-up alarm's two minutes (GpuEndpoint's step policy) and a margin.
WAKE_SLACK_S = 300


def _cold_start_budget(endpoint: GpuEndpoint, budget: cdk.Duration | None) -> cdk.Duration:
    """The budget of an asynchronous endpoint that may idle at zero instances: a deploy's request first wakes it
    (the wake-up alarm, then an instance's provisioning, download and start-up). Not given: long enough for that,
    within ``MAX_BUDGET``; a budget shorter than that (given, or capped) is kept with a synth warning."""
    needed = endpoint.cold_start_s + WAKE_SLACK_S
    chosen = budget or cdk.Duration.seconds(min(MAX_BUDGET.to_seconds(), max(_DEFAULT.budget_s, needed)))
    if chosen.to_seconds() < needed:
        cdk.Annotations.of(endpoint).add_warning_v2(
            "llm:async-smoke-budget",
            f"the smoke test's budget of {chosen.to_seconds():.0f} s is shorter than waking this asynchronous "
            f"endpoint from zero instances may take: the wake-up alarm (2 minutes), then an instance's provisioning, "
            f"download and start-up ({endpoint.cold_start_s} s), so a deploy made while it idles may fail its smoke "
            f"test. Allowed: a budget of {needed} s or more (at most {MAX_BUDGET.to_seconds():.0f}: then lower "
            "those timeouts), or a minimum of 1 instance.",
        )
    return chosen


def request_problems(
    extra_body: Mapping[str, Any] | None,
    expected_pattern: str | None,
    *,
    body_key: str = "extra_body",
    pattern_key: str = "expected_pattern",
) -> list[str]:
    """What is wrong with the smoke test's extra request fields and expected pattern, each named by its key:
    the construct's prop names, or the context keys (``smoke_inputs``, ``smoke_expected_pattern``)."""
    problems = []
    reserved = [key for key in RESERVED_BODY_KEYS if extra_body and key in extra_body]
    if reserved:
        problems.append(
            f"{body_key}: sets {', '.join(reserved)}, which the smoke test sends itself; allowed: other request "
            'fields such as {"chat_template_kwargs": {"enable_thinking": false}}'
        )
    if expected_pattern is not None and not cdk.Token.is_unresolved(expected_pattern):
        try:
            re.compile(expected_pattern)
        except re.error as e:
            problems.append(f"{pattern_key}={expected_pattern!r}: not a Python regular expression ({e})")
    return problems


@jsii.implements(cdk.IStableStringProducer)
class _Fingerprint:
    """sha256 of the resolved values, computed at synth time so that late property changes count."""

    def __init__(self, scope: IConstruct, values: Sequence[Any]) -> None:
        self._scope = scope
        self._values = tuple(values)

    def produce(self) -> str:
        stack = cdk.Stack.of(self._scope)
        rendered = stack.resolve([_fingerprint_value(v) for v in self._values])
        text = json.dumps(rendered, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _fingerprint_value(value: Any) -> Any:
    """A CfnResource counts with its type and properties; another construct with every CfnResource in it."""
    if isinstance(value, cdk.CfnResource):
        return {"Type": value.cfn_resource_type, "Properties": value._cfn_properties}
    if isinstance(value, Construct):
        resources = [c for c in value.node.find_all() if isinstance(c, cdk.CfnResource)]
        return [_fingerprint_value(r) for r in resources]
    return value


class EndpointSmokeTest(Construct):
    """Invoke the endpoint at the end of every deployment that changes it; fail the stack if it does not answer.

    Minimal use: ``EndpointSmokeTest.for_endpoint(self, "SmokeTest", endpoint)``.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        endpoint_name: str,
        endpoint_config_name: str,
        endpoint_arn: str,
        inference_component_name: str | None = None,
        inference_component_arn: str | None = None,
        model_name: str | None = None,
        prompt: str = DEFAULT_PROMPT,
        max_tokens: int = _DEFAULT.max_tokens,
        extra_body: Mapping[str, Any] | None = None,
        expected_pattern: str | None = None,
        budget: cdk.Duration | None = None,
        stream: bool = _DEFAULT.stream,
        stream_format: str = _DEFAULT.stream_format,
        fingerprint: Sequence[Any] = (),
        depends_on: Sequence[IDependable] = (),
        load: LoadGate | None = None,
        metric_deployment: str | None = None,
        async_queue: AsyncQueue | None = None,
    ) -> None:
        """
        :param endpoint_name: the endpoint to invoke.
        :param endpoint_config_name: the config this deployment created; the endpoint must run it.
        :param endpoint_arn: the only endpoint the handler may describe and invoke.
        :param inference_component_name: invoke this component and check that it is InService.
            Default: invoke the endpoint's model directly.
        :param inference_component_arn: required with ``inference_component_name``.
        :param model_name: the component's model this deployment created; the component must run it (a rolling
            update rolled back by an alarm leaves the old model InService). Default: not checked.
        :param prompt: the user message (it appears in the template: no secrets). Default: a one-sentence
            question about S3.
        :param max_tokens: most tokens per answer. Default: 64.
        :param extra_body: merged into the chat request (``temperature``, ``chat_template_kwargs``...);
            ``None`` values remove defaults. Default: none.
        :param expected_pattern: a Python regular expression the answer must contain (``re.search``).
            Default: any non-empty answer passes.
        :param budget: how long transient failures (model not ready, 5xx, throttling, no capacity yet)
            are retried, 1 to 45 minutes. Default: 10 minutes; with ``for_endpoint`` of an asynchronous endpoint that
            may idle at zero instances, its cold start (``GpuEndpoint.cold_start_s``) plus 5 minutes, at most 45.
        :param stream: also check a streamed answer. Default: yes.
        :param stream_format: how the engine frames a streamed answer, the ``stream_format`` of its
            entry in data/engines.json: ``sse`` or ``jsonlines`` (LMI). Default: ``sse``.
        :param fingerprint: values whose change must re-run the test; a ``CfnResource`` counts with its
            properties, another construct with every ``CfnResource`` in it. Read at synth time, so changes
            made later count; escape-hatch overrides (``add_property_override``) do not, pass their values
            here if they matter (most replace the model or config, whose new name re-runs the test anyway).
            Default: none.
        :param depends_on: what must be deployed first. Default: nothing beyond what the tokens imply.
        :param load: after the answer check, a burst of streamed requests whose figures must meet these targets
            (constructs_lib/load_gate.py, with the budget rule); the figures become attributes and CloudWatch
            metrics, and the handler's role may put metrics in the namespace ``LlmEndpoint/SmokeTest`` only.
            Default: no burst, no metrics (the template has none of it).
        :param metric_deployment: with ``load``, the value of the metrics' ``Deployment`` dimension, what a
            dashboard plots each deploy's figures by. Default: this construct's path (``<stack>/<id>...``), stable
            from one deploy to the next.
        :param async_queue: the endpoint is asynchronous (``GpuEndpoint.async_queue``): the check submits one
            request with ``InvokeEndpointAsync`` (inline body), waits for its answer object within the budget, applies
            the same answer checks and deletes what it wrote; no stream, no load gate. Its role may invoke
            asynchronously and read and delete only the answers below ``<output>/smoke-test/`` and the failures.
            Default: a real-time endpoint (``for_endpoint`` passes it).
        """
        super().__init__(scope, id)
        budget = budget or cdk.Duration.seconds(_DEFAULT.budget_s)
        self._validate(
            endpoint_name=endpoint_name,
            endpoint_config_name=endpoint_config_name,
            endpoint_arn=endpoint_arn,
            inference_component_name=inference_component_name,
            inference_component_arn=inference_component_arn,
            prompt=prompt,
            max_tokens=max_tokens,
            extra_body=extra_body,
            expected_pattern=expected_pattern,
            budget=budget,
            stream_format=stream_format,
            load=load,
            asynchronous=async_queue is not None,
        )
        self.load = load
        self.async_queue = async_queue
        self.metric_deployment = metric_deployment or self.node.path
        self.provider = HandlerProvider.of(
            self,
            PROVIDER_ID,
            handler="endpoint_smoke_test",
            packages=["endpoint_client"],
            is_complete=True,
            timeout=HANDLER_TIMEOUT,
            query_interval=QUERY_INTERVAL,
            total_timeout=TOTAL_TIMEOUT,
        )
        invoked = [endpoint_arn] + ([inference_component_arn] if inference_component_arn else [])
        role = self.provider.role
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=["sagemaker:DescribeEndpoint"], resources=[endpoint_arn])
        )
        if async_queue is not None:
            async_queue.grant_smoke_test(role, endpoint_arn, SMOKE_OUTPUT_EXTENSION)
            async_queue.expire_smoke_answers(SMOKE_OUTPUT_EXTENSION)
            # A queued answer may take minutes: each is_complete run waits for it as long as Lambda allows (900 s,
            # Lambda quotas), so fewer runs hand back to the waiter (the request itself is submitted once, by
            # on_event).
            self._longest_handler_run()
        else:
            # InvokeEndpointWithResponseStream is authorized as sagemaker:InvokeEndpoint; both are named so
            # the grant matches GpuEndpoint.grant_invoke. With a component, IAM checks the endpoint and the
            # inference component (service authorization reference: InvokeEndpoint, resource types
            # endpoint* and inference-component).
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"],
                    resources=invoked,
                )
            )
        if inference_component_arn:
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=["sagemaker:DescribeInferenceComponent"], resources=[inference_component_arn]
                )
            )
        window_s = load.window_s if load is not None else 0.0
        if load is not None:
            self._enable_load_gate()

        # The handler reads these with the same class (handler_kit/resources.py): names and defaults defined once.
        properties = EndpointSmokeTestProperties(
            endpoint_name=endpoint_name,
            endpoint_config_name=endpoint_config_name,
            inference_component_name=inference_component_name,
            model_name=model_name,
            prompt=prompt,
            max_tokens=max_tokens,
            extra_body=cdk.Stack.of(self).to_json_string(dict(extra_body)) if extra_body else {},
            expected_pattern=expected_pattern,
            budget_s=int(budget.to_seconds()),
            stream=stream and async_queue is None,  # an asynchronous answer is written whole
            stream_format=stream_format,  # left out while it is SSE, so the SSE engines' templates stay as they were
            fingerprint=cdk.Lazy.string(_Fingerprint(self, fingerprint)),
            **(self._load_properties(load, window_s) if load is not None else {}),
            **(
                {
                    "async_output_path": async_queue.output_path,
                    "async_failure_path": async_queue.failure_path,
                    "invocation_timeout_s": async_queue.invocation_timeout_s,
                }
                if async_queue is not None
                else {}
            ),
        ).to_properties()
        self.resource = cdk.CustomResource(
            self,
            "Resource",
            service_token=self.provider.service_token,
            resource_type=RESOURCE_TYPE,
            properties=properties,
            # With a gate, the burst's window on top (the budget rule in load_gate.py keeps the sum within 3600 s).
            service_timeout=budget.plus(SERVICE_TIMEOUT_MARGIN).plus(cdk.Duration.seconds(window_s)),
        )
        # The handler's permissions must be in place before it runs.
        self.resource.node.add_dependency(role)
        for dependency in depends_on:
            self.resource.node.add_dependency(dependency)
        self.node.default_child = self.resource
        self.budget = budget

    def _longest_handler_run(self) -> None:
        """The provider's is_complete function runs up to Lambda's longest timeout, 900 s (Lambda quotas)."""
        function = self.provider.is_complete_function
        cfn_function = function.node.default_child if function is not None else None
        if isinstance(cfn_function, lambda_.CfnFunction):  # the smoke test's provider always has is_complete
            cfn_function.timeout = int(GATE_HANDLER_TIMEOUT.to_seconds())

    def _enable_load_gate(self) -> None:
        """What the burst needs of the stack's one provider: a longer run, and PutMetricData in one namespace."""
        # The checks' attempt and the burst in one run.
        self._longest_handler_run()
        role = self.provider.role
        # PutMetricData supports no resource types, only the cloudwatch:namespace condition key (Service
        # Authorization Reference, "Actions, resources, and condition keys for Amazon CloudWatch":
        # docs.aws.amazon.com/service-authorization/latest/reference/list_amazoncloudwatch.html; CloudWatch user
        # guide iam-cw-condition-keys-namespace.html). Added once per provider: several gates share the statement.
        if self.provider.node.try_find_child(_METRICS_GRANTED) is None:
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=["cloudwatch:PutMetricData"],
                    resources=["*"],
                    conditions={"StringEquals": {"cloudwatch:namespace": SMOKE_METRIC_NAMESPACE}},
                )
            )
            Construct(self.provider, _METRICS_GRANTED)  # a marker (no resource): the statement is on the role
            acknowledge_wildcard(
                role,
                resource="*",
                reason="cloudwatch:PutMetricData supports no resource types (Service Authorization Reference for "
                f"CloudWatch); the statement's cloudwatch:namespace condition allows the {SMOKE_METRIC_NAMESPACE} "
                "namespace only, where the smoke test's load gate publishes its figures.",
            )

    def _load_properties(self, load: LoadGate, window_s: float) -> dict[str, Any]:
        return {
            "load_concurrency": load.concurrency,
            "load_requests": load.requests,
            "load_max_tokens": load.max_tokens,
            "load_window_s": window_s,
            "target_ttft_p95_ms": load.ttft_p95_ms,
            "target_itl_p95_ms": load.itl_p95_ms,
            "target_min_output_tokens_per_s": load.min_output_tokens_per_s,
            # The handler reads "not given" as none allowed; written out so the template says what is checked.
            "target_max_error_rate": load.max_error_rate if load.max_error_rate is not None else 0.0,
            "metric_deployment": self.metric_deployment,
        }

    def load_figure(self, name: str) -> str:
        """One figure of the load burst (a key of ``handler_kit.resources.LOAD_FIGURES``, e.g. ``LoadTtftP95Ms``)
        as a token: the resource's attribute, ``n/a`` when nothing measured it. Only with ``load``."""
        if self.load is None:
            raise ValueError(f"EndpointSmokeTest {self.node.path} has no load gate: no {name} figure")
        if name not in LOAD_FIGURES:
            raise ValueError(f"{name!r} is not a load figure; allowed: {', '.join(LOAD_FIGURES)}")
        return self.resource.get_att_string(name)

    @property
    def metric_dimensions(self) -> dict[str, str]:
        """The dimensions of this smoke test's load metrics (namespace ``LlmEndpoint/SmokeTest``)."""
        return {SMOKE_METRIC_DIMENSION: self.metric_deployment}

    @classmethod
    def for_endpoint(
        cls, scope: Construct, id: str, endpoint: GpuEndpoint | InferenceComponent, **options: Any
    ) -> EndpointSmokeTest:
        """The smoke test of a :class:`GpuEndpoint` (or of an :class:`InferenceComponent`, as ``for_component``):
        runs after it, re-runs when its model or config changes."""
        from .inference_component import InferenceComponent

        if isinstance(endpoint, InferenceComponent):
            return cls.for_component(scope, id, endpoint, **options)
        if getattr(endpoint, "idles_to_zero", False):
            options["budget"] = _cold_start_budget(endpoint, options.get("budget"))
        return cls(
            scope,
            id,
            **_endpoint_props(endpoint),
            stream_format=options.pop("stream_format", endpoint.engine.stream_format),
            async_queue=options.pop("async_queue", getattr(endpoint, "async_queue", None)),
            fingerprint=[endpoint.model, endpoint.endpoint_config, endpoint.endpoint, *options.pop("fingerprint", ())],
            depends_on=[endpoint, *options.pop("depends_on", ())],
            **options,
        )

    @classmethod
    def for_component(
        cls, scope: Construct, id: str, component: InferenceComponent, **options: Any
    ) -> EndpointSmokeTest:
        """The smoke test of one :class:`InferenceComponent`, invoked by its name on its endpoint.

        It runs after the component and re-runs when the component, its model or the endpoint's config changes;
        the component must run the model this deployment created (a rolling update that an alarm rolled back
        leaves the old model InService). Each component of a shared endpoint gets its own.
        """
        endpoint = component.endpoint
        return cls(
            scope,
            id,
            **_endpoint_props(endpoint),
            inference_component_name=component.inference_component_name,
            inference_component_arn=component.inference_component_arn,
            model_name=component.model.attr_model_name,
            stream_format=options.pop("stream_format", component.engine.stream_format),
            fingerprint=[
                component.model,
                component.component,
                endpoint.endpoint_config,
                endpoint.endpoint,
                *options.pop("fingerprint", ()),
            ],
            depends_on=[endpoint, component, *options.pop("depends_on", ())],
            **options,
        )

    @property
    def time_to_first_token_ms(self) -> str:
        """Milliseconds to the first streamed token (the whole answer's latency when not streaming)."""
        return self.resource.get_att_string("TimeToFirstTokenMs")

    @property
    def latency_ms(self) -> str:
        """Milliseconds for the whole non-streamed answer."""
        return self.resource.get_att_string("LatencyMs")

    @property
    def tokens_per_second(self) -> str:
        """Decoding speed of the streamed answer (after its first token)."""
        return self.resource.get_att_string("TokensPerSecond")

    def _validate(
        self,
        *,
        endpoint_name: str,
        endpoint_config_name: str,
        endpoint_arn: str,
        inference_component_name: str | None,
        inference_component_arn: str | None,
        prompt: str,
        max_tokens: int,
        extra_body: Mapping[str, Any] | None,
        expected_pattern: str | None,
        budget: cdk.Duration,
        stream_format: str = "sse",
        load: LoadGate | None = None,
        asynchronous: bool = False,
    ) -> None:
        problems: list[str] = []
        for name, value in (
            ("endpoint_name", endpoint_name),
            ("endpoint_config_name", endpoint_config_name),
            ("endpoint_arn", endpoint_arn),
        ):
            if not value:
                problems.append(f"{name} is required")
        if bool(inference_component_name) != bool(inference_component_arn):
            problems.append("inference_component_name and inference_component_arn go together: give both or neither")
        if not cdk.Token.is_unresolved(prompt) and not prompt.strip():
            problems.append("prompt must not be empty")
        if not cdk.Token.is_unresolved(max_tokens) and (not isinstance(max_tokens, int) or max_tokens < 1):
            problems.append(f"max_tokens={max_tokens!r} must be a whole number of at least 1")
        if stream_format not in STREAM_FORMATS:
            problems.append(f"stream_format={stream_format!r} is not one of {', '.join(STREAM_FORMATS)}")
        problems += request_problems(extra_body, expected_pattern)
        seconds = budget.to_seconds()
        if not MIN_BUDGET.to_seconds() <= seconds <= MAX_BUDGET.to_seconds():
            problems.append(
                f"budget={seconds:.0f} s is outside {MIN_BUDGET.to_seconds():.0f}-{MAX_BUDGET.to_seconds():.0f} s "
                "(CloudFormation waits at most one hour for a custom resource)"
            )
        if load is not None:
            problems += load_gate_problems(load, seconds, names=_LOAD_PROP_NAMES)
        if load is not None and asynchronous:
            problems.append(
                "load: the load gate streams its requests, and an asynchronous endpoint answers only through its "
                "queue (no InvokeEndpoint, no response stream); leave load unset, or measure with llmops bench --async"
            )
        if inference_component_name and asynchronous:
            problems.append("inference_component_name: an asynchronous endpoint hosts no inference components")
        refuse(construct_subject("EndpointSmokeTest", self), problems)
