"""The SDK task of virtual_time.py (check v1): a durable task that sleeps an hour."""

from datetime import timedelta

from hatchet_sdk import DurableContext, Hatchet
from pydantic import BaseModel

hatchet = Hatchet()
HOUR = timedelta(hours=1)


class Msg(BaseModel):
    nonce: str


# The timeout covers the sleep: skipped time counts toward it, as real time would.
@hatchet.durable_task(name="vt-sleep", input_validator=Msg, execution_timeout=timedelta(hours=2))
async def vt_sleep(input: Msg, ctx: DurableContext) -> dict[str, object]:
    await ctx.aio_sleep_for(HOUR)
    return {"nonce": input.nonce, "slept": True}
