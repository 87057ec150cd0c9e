"""A structural check of the two Prometheus Operator kinds the manifests use: ServiceMonitor and
PrometheusRule (monitoring.coreos.com/v1).

No PyPI or npm package ships the operator's CRD files (the npm `@kubernetes-models/
prometheus-operator` ships compiled validators, PyPI's `cloudcoil-models-prometheus-operator`
Pydantic classes), so these JSON Schemas are written here, after the field names, types,
enumerations and duration pattern of the v1 CRDs, for the parts of the two kinds that matter to
ecoguard. Like the CRDs (structural schemas), every modelled object rejects fields it does not
know: the API server would prune them silently, and `kubectl apply`'s default strict field
validation refuses them, so a misspelled `relabellings` must fail here too. Fields ecoguard does
not use are accepted with any value (`{}`), so adding one does not fail for a wrong reason.
"""

from __future__ import annotations

from typing import Any

ANY: dict[str, Any] = {}
# The operator's Duration: Prometheus' duration syntax, units from years to milliseconds.
DURATION = {
    "type": "string",
    "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
}
LABEL_NAME = {"type": "string", "pattern": r"^[a-zA-Z_][a-zA-Z0-9_]*$"}
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
INT_OR_STRING = {"anyOf": [{"type": "integer"}, {"type": "string"}]}

OBJECT_META = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {
            "type": "string",
            "maxLength": 253,
            "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
        },
        "namespace": {"type": "string"},
        "labels": STRING_MAP,
        "annotations": STRING_MAP,
    },
}

LABEL_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "matchLabels": STRING_MAP,
        "matchExpressions": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["key", "operator"],
                "properties": {
                    "key": {"type": "string"},
                    "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                    "values": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
    },
}

RELABEL_ACTIONS = [
    spelling
    for action in (
        "replace",
        "keep",
        "drop",
        "hashmod",
        "labelmap",
        "labeldrop",
        "labelkeep",
        "lowercase",
        "uppercase",
        "keepequal",
        "dropequal",
    )
    for spelling in (
        action,
        {
            "hashmod": "HashMod",
            "labelmap": "LabelMap",
            "labeldrop": "LabelDrop",
            "labelkeep": "LabelKeep",
            "keepequal": "KeepEqual",
            "dropequal": "DropEqual",
        }.get(action, action.capitalize()),
    )
]

RELABEL_CONFIG = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "sourceLabels": {"type": "array", "items": LABEL_NAME},
        "separator": {"type": "string"},
        "targetLabel": {"type": "string"},
        "regex": {"type": "string"},
        "modulus": {"type": "integer", "minimum": 0},
        "replacement": {"type": "string"},
        "action": {"enum": RELABEL_ACTIONS},
    },
}

ENDPOINT = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "port": {"type": "string"},
        "targetPort": INT_OR_STRING,
        "path": {"type": "string"},
        "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
        "params": {
            "type": "object",
            "additionalProperties": {"type": "array", "items": {"type": "string"}},
        },
        "interval": DURATION,
        "scrapeTimeout": DURATION,
        "honorLabels": {"type": "boolean"},
        "honorTimestamps": {"type": "boolean"},
        "trackTimestampsStaleness": {"type": "boolean"},
        "relabelings": {"type": "array", "items": RELABEL_CONFIG},
        "metricRelabelings": {"type": "array", "items": RELABEL_CONFIG},
        "filterRunning": {"type": "boolean"},
        "followRedirects": {"type": "boolean"},
        "enableHttp2": {"type": "boolean"},
        "tlsConfig": ANY,
        "bearerTokenFile": {"type": "string"},
        "bearerTokenSecret": ANY,
        "authorization": ANY,
        "basicAuth": ANY,
        "oauth2": ANY,
        "proxyUrl": {"type": "string"},
    },
}

SERVICE_MONITOR = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": OBJECT_META,
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "endpoints"],
            "properties": {
                "jobLabel": {"type": "string"},
                "targetLabels": {"type": "array", "items": {"type": "string"}},
                "podTargetLabels": {"type": "array", "items": {"type": "string"}},
                "endpoints": {"type": "array", "items": ENDPOINT},
                "selector": LABEL_SELECTOR,
                "selectorMechanism": {"enum": ["RelabelConfig", "RoleSelector"]},
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "any": {"type": "boolean"},
                        "matchNames": {"type": "array", "items": {"type": "string"}},
                    },
                },
                "sampleLimit": {"type": "integer", "minimum": 0},
                "targetLimit": {"type": "integer", "minimum": 0},
                "labelLimit": {"type": "integer", "minimum": 0},
                "labelNameLengthLimit": {"type": "integer", "minimum": 0},
                "labelValueLengthLimit": {"type": "integer", "minimum": 0},
                "keepDroppedTargets": {"type": "integer", "minimum": 0},
                "attachMetadata": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"node": {"type": "boolean"}},
                },
                "scrapeClass": {"type": "string", "minLength": 1},
                "scrapeProtocols": {"type": "array", "items": {"type": "string"}},
                "fallbackScrapeProtocol": {"type": "string"},
            },
        },
    },
}

RULE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["expr"],
    # Prometheus: a rule records or alerts, never both (the operator's admission check runs
    # Prometheus' own rule parser).
    "oneOf": [{"required": ["record"]}, {"required": ["alert"]}],
    "properties": {
        "record": {"type": "string", "pattern": r"^[a-zA-Z_:][a-zA-Z0-9_:]*$"},
        "alert": {"type": "string", "minLength": 1},
        "expr": {"anyOf": [{"type": "integer"}, {"type": "string", "minLength": 1}]},
        "for": DURATION,
        "keep_firing_for": {**DURATION, "minLength": 1},
        "labels": STRING_MAP,
        "annotations": STRING_MAP,
    },
}

PROMETHEUS_RULE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": OBJECT_META,
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "groups": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["name"],
                        "properties": {
                            "name": {"type": "string", "minLength": 1},
                            "interval": DURATION,
                            "query_offset": DURATION,
                            "limit": {"type": "integer"},
                            "partial_response_strategy": {"type": "string"},
                            "labels": STRING_MAP,
                            "rules": {"type": "array", "items": RULE},
                        },
                    },
                }
            },
        },
    },
}

SCHEMAS = {"ServiceMonitor": SERVICE_MONITOR, "PrometheusRule": PROMETHEUS_RULE}
