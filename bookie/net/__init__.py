"""The connection plumbing every shell shares: one protocol base, one stream transport.

`framed_protocol` (coalescing per loop turn, send-stall detection),
`stream_transport` (an asyncio transport over any anyio byte stream),
`outbox` (coalesced sends with backpressure over a stream) and
`connection_errors` (what a broken connection raises).
"""
