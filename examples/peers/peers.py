"""The peers' side of the side-by-side bench (`examples/peers/run.sh`): the OpenAI Agents SDK
and LangGraph's `create_react_agent` run the same workloads as `examples/peer_workloads.rs`,
against the same mock model server. Prints one JSON line per framework and workload.

    python peers.py BASE_URL FRAMEWORK [WORKLOAD...]     # FRAMEWORK: agents_sdk | langgraph
"""

import asyncio
import json
import sys
import time
import warnings

FAN_OUT_CALLS = 8
TOOL_TIME = 0.2
LONG_TURNS = 200
MANY_SESSIONS = 200
CONCURRENT_SESSIONS = 100
WORKLOADS = ["fan_out", "long_conversation", "many_conversations", "concurrent"]


async def slow_lookup_body(n: int) -> str:
    await asyncio.sleep(TOOL_TIME)
    return "found"


class AgentsSdk:
    """The OpenAI Agents SDK, on chat completions, tracing off."""

    def __init__(self, base_url):
        from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
        from openai import AsyncOpenAI

        set_tracing_disabled(True)
        client = AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)
        model = OpenAIChatCompletionsModel(model="mock", openai_client=client)

        @function_tool
        async def slow_lookup(n: int) -> str:
            """Look up one item; takes a while."""
            return await slow_lookup_body(n)

        self.runner = Runner
        self.agent = Agent(name="bench", instructions="You help.", tools=[slow_lookup], model=model)

    async def turn(self, history, text):
        result = await self.runner.run(self.agent, history + [{"role": "user", "content": text}])
        return result.to_input_list(), len([i for i in result.new_items if i.type == "tool_call_item"])


class LangGraph:
    """LangGraph's prebuilt ReAct agent over langchain-openai."""

    def __init__(self, base_url):
        from langchain_core.tools import tool
        from langchain_openai import ChatOpenAI

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from langgraph.prebuilt import create_react_agent

            @tool
            async def slow_lookup(n: int) -> str:
                """Look up one item; takes a while."""
                return await slow_lookup_body(n)

            model = ChatOpenAI(base_url=base_url, api_key="bench", model="mock", max_retries=0)
            self.agent = create_react_agent(model, [slow_lookup], prompt="You help.")

    async def turn(self, history, text):
        state = await self.agent.ainvoke({"messages": history + [("user", text)]})
        messages = state["messages"]
        calls = sum(len(getattr(m, "tool_calls", None) or []) for m in messages[len(history) :])
        return messages, calls


def report(framework, workload, wall, units):
    print(
        json.dumps(
            {
                "framework": framework,
                "workload": workload,
                "wall_s": wall,
                "per_unit_ms": wall / max(units, 1) * 1000.0,
            }
        ),
        flush=True,
    )


async def run(framework, base_url, chosen):
    peer = {"agents_sdk": AgentsSdk, "langgraph": LangGraph}[framework](base_url)
    if "fan_out" in chosen:
        start = time.perf_counter()
        _, calls = await peer.turn([], "fan out: look up eight items")
        wall = time.perf_counter() - start
        if calls != FAN_OUT_CALLS:
            raise SystemExit(f"{framework}: the model asked for {calls} calls, not {FAN_OUT_CALLS}")
        report(framework, "fan_out", wall, 1)
    if "long_conversation" in chosen:
        history = []
        start = time.perf_counter()
        for turn in range(LONG_TURNS):
            history, _ = await peer.turn(history, f"turn {turn}")
        report(framework, "long_conversation", time.perf_counter() - start, LONG_TURNS)
    if "many_conversations" in chosen:
        start = time.perf_counter()
        for turn in range(MANY_SESSIONS):
            await peer.turn([], f"conversation {turn}")
        report(framework, "many_conversations", time.perf_counter() - start, MANY_SESSIONS)
    if "concurrent" in chosen:
        start = time.perf_counter()
        await asyncio.gather(*(peer.turn([], f"session {n}") for n in range(CONCURRENT_SESSIONS)))
        report(framework, "concurrent", time.perf_counter() - start, 1)


def main():
    if len(sys.argv) < 3:
        raise SystemExit("usage: peers.py BASE_URL agents_sdk|langgraph [WORKLOAD...]")
    chosen = sys.argv[3:] or WORKLOADS
    asyncio.run(run(sys.argv[2], sys.argv[1], chosen))


if __name__ == "__main__":
    main()
