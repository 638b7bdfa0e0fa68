"""Schemathesis hooks of test/schemathesis.test.ts (loaded through SCHEMATHESIS_HOOKS).

The API accepts any http(s) URL in the test stack (ALLOW_PRIVATE_URLS=true), and the worker then
calls it: a webhook subscription's `url` gets deliveries and pings, a message's `mediaUrl` a size
check, an instance's `baseUrl` the provider calls. Generated URLs must never leave this machine,
so before every request each such field that holds an http(s) URL is pointed at a local target:
the test's receiver for webhooks, the provider emulator's media files and API for the others.
A member reference (`assignedTo`, `authorId`, `memberId`) names a member of the workspace or is refused with
400 ASSIGNEE_NOT_FOUND, a fact of the data no schema can state: a string there becomes the id of
the member the test created, like the identifiers one supplies to any contract tester.
Schemathesis revalidates a case a hook changed, so the case keeps its true positive/negative mode.
"""
import os
import re

import schemathesis
from hypothesis.internal import lambda_sources

# CPython 3.11.7's ast.parse can raise "SystemError: AST constructor recursion depth mismatch" when
# called deep in the stack, as Hypothesis (pinned in scripts/stack.ts) does to describe a lambda in
# a recursive strategy's repr (any-JSON values of negative cases). The description is cosmetic:
# fall back to a plain one instead of aborting the operation.
_describe = lambda_sources.lambda_description


def _safe_description(f):
    try:
        return _describe(f)
    except SystemError:
        return "lambda"


lambda_sources.lambda_description = _safe_description

TARGETS = {
    "url": os.environ["ST_WEBHOOK_URL"],
    "mediaUrl": os.environ["ST_MEDIA_URL"],
    "baseUrl": os.environ["ST_PROVIDER_URL"],
}
MEMBER_FIELDS = {"assignedTo", "authorId", "memberId"}
MEMBER_ID = os.environ["ST_MEMBER_ID"]
HTTP_URL = re.compile(r"^https?:", re.IGNORECASE)


def _is_http_url(text):
    # As a WHATWG URL parser reads it: tabs and newlines anywhere, C0 controls and spaces at the ends, do not count.
    return bool(HTTP_URL.match(re.sub(r"[\t\n\r]", "", text).strip("".join(map(chr, range(0x21))))))


def _localise(value):
    if isinstance(value, dict):
        for key, item in value.items():
            if key in TARGETS and isinstance(item, str) and _is_http_url(item):
                value[key] = TARGETS[key]
            elif key in MEMBER_FIELDS and isinstance(item, str):
                value[key] = MEMBER_ID
            else:
                _localise(item)
    elif isinstance(value, list):
        for item in value:
            _localise(item)


def _has_proto_key(value):
    if isinstance(value, dict):
        return "__proto__" in value or any(_has_proto_key(item) for item in value.values())
    if isinstance(value, list):
        return any(_has_proto_key(item) for item in value)
    return False


@schemathesis.hook
def filter_body(context, body):
    # The JSON parser refuses a `__proto__` key anywhere (400 VALIDATION, a prototype-pollution
    # guard stated once in docs/api-conventions.md#requests rather than on every object schema).
    return not _has_proto_key(body)


@schemathesis.hook
def before_call(context, case, kwargs):
    _localise(case.body)
