"""ListTransactions (66) v0-2: transactional ids and their states (KIP-664).

Filters, as Kafka's ``listTransactionStates``: state names (unknown names are echoed in
``unknown_state_filters`` and match nothing), producer ids, v1+ a duration (transactions running
longer than it), v2+ a transactional id pattern (a regular expression matched against the whole id;
an invalid one gets INVALID_REQUEST). The pattern comes from a client and is matched against every
id, so it is compiled by RE2 with the bounds of the consumer-group topic regexes
(``coordinator/group/topic_regex.py``): matching stays linear whatever the pattern. Empty filters match everything; ids in the
transient Dead state are never listed. COORDINATOR_LOAD_IN_PROGRESS while a partition loads.

Authorization (``broker/authz.py``), as Kafka: ids the principal may not DESCRIBE are left out
(asked quietly).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.authz import Operation, ResourceType
from broker.context import RequestContext
from broker.handlers._common import NO_THROTTLE
from coordinator.group.topic_regex import InvalidTopicRegex, compile_topic_regex
from coordinator.txn.metadata import TxnState
from protocol.codec import response_module
from protocol.messages import make

if TYPE_CHECKING:
    from broker.handlers._requests import ListTransactionsRequest

API_KEY = 66
VERSIONS = (0, 2)


def handle(ctx: RequestContext, req: ListTransactionsRequest) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    unknown = tuple(s for s in req.state_filters if TxnState.from_name(s) is None)
    states = [s for n in req.state_filters if (s := TxnState.from_name(n)) is not None]
    pattern = getattr(req, "transactional_id_pattern", None)
    regex = None
    if pattern:
        try:
            regex = compile_topic_regex(pattern)
        except InvalidTopicRegex:
            return make(m.ListTransactionsResponse, throttle_time=NO_THROTTLE,
                        error_code=ErrorCode.invalid_request, unknown_state_filters=unknown,
                        transaction_states=())
    if req.state_filters and not states:
        listed: Any = []  # only unknown states asked: nothing matches
    else:
        listed = ctx.broker.transactions.list_transactions(states, req.producer_id_filters,
                                              getattr(req, "duration_filter", -1))
    if isinstance(listed, ErrorCode):
        return make(m.ListTransactionsResponse, throttle_time=NO_THROTTLE, error_code=listed,
                    unknown_state_filters=unknown, transaction_states=())
    if regex is not None:
        listed = [t for t in listed if regex.matches(t.transactional_id)]
    hidden = ctx.denied(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                        [t.transactional_id for t in listed], audit=False)
    return make(m.ListTransactionsResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                unknown_state_filters=unknown, transaction_states=tuple(
                    m.TransactionState(transactional_id=t.transactional_id,
                                       producer_id=t.producer_id,
                                       transaction_state=t.state.kafka_name)
                    for t in listed if t.transactional_id not in hidden))
