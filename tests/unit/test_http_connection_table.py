"""Which HTTP connection makes room for a newcomer when the table is full, without a server."""

from __future__ import annotations


def test_which_connection_makes_room() -> None:
    """The table's order, without a server: waiting first (oldest first, a request on its way in
    kept), then serving an open request, never trusted; none: the newcomer is refused."""
    import asyncio

    from pumpd.http.connections import ConnectionTable, RequestReader, Stage

    async def run() -> None:
        table = ConnectionTable(3)
        readers = [RequestReader() for _ in range(6)]
        idle, trusted, serving = (table.admit(None, reader=r) for r in readers[:3])
        assert idle and trusted and serving
        trusted.stage, serving.stage = Stage.TRUSTED, Stage.SERVING
        arriving = table.admit(None, reader=readers[3])  # makes room of the idle one
        assert arriving and idle.evicted and not serving.evicted
        readers[3].feed_data(b"GET / HTTP/1.1\r\nHost: x\r\n")
        readers[3].feed_data(b"\r\n")  # the blank line in a chunk of its own
        slow = table.admit(None, reader=readers[4])  # the arriving one is kept: serving goes
        assert slow and serving.evicted and not arriving.evicted
        readers[4].feed_data(b"GET / HT")  # a head begun, not whole: nothing on its way in
        newest = table.admit(None, reader=readers[5])
        assert newest and slow.evicted
        assert table.evicted == 3 and len(table) == 3
        arriving.head_read = True
        arriving.stage = Stage.TRUSTED
        last = table.admit(None)  # the only one waiting goes, young as it is
        assert last and newest.evicted
        last.stage = Stage.TRUSTED
        assert table.admit(None) is None  # every slot trusted: refused
        assert table.evicted == 4

    asyncio.run(run())

