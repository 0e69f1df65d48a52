"""A suite's workload entry (``[[workloads]]``): which dataset family, which part of it, how many prompts.

It lives with the workloads, which read it, below the plan that holds a list of them: the workloads import
nothing of ``plan/`` (the layer order in ``tests/test_imports.py``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class StrictModel(BaseModel):
    """A suite's tables: an unknown key or a value of the wrong type is an error; frozen once read."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class WorkloadSpec(StrictModel):
    """One workload of a suite: a dataset family (registry name), its config/split, category filter, data."""

    name: str = Field(min_length=1, description="workload registry name: gsm8k, speed-bench, synthetic, ...")
    config: str | None = Field(None, description="dataset config, e.g. SPEED-Bench 'qualitative'")
    split: str | None = Field(None, description="dataset split; the workload's default when unset")
    categories: list[str] | None = Field(None, description="keep only these categories")
    data: str | None = Field(None, description="local file or folder in the dataset's own format")
    max_tokens: int | None = Field(None, ge=1, le=1_048_576, description="max output tokens; the suite's when unset")
    num_prompts: int | None = Field(None, ge=1, le=1_000_000, description="prompts drawn; the suite's when unset")
    thinking: bool | None = Field(
        None, description="chat_template_kwargs.enable_thinking; unset: the model registry's default, else off"
    )
    thinking_slice: bool = Field(False, description="one side of the suite's thinking on/off slice (set by the "
                                 "suite's thinking_slice key): the label says which")
    on_placeholder: Literal["error", "skip"] = Field(
        "error", description="SPEED-Bench rows not yet rebuilt from their sources: stop with the fix, or skip"
    )

    @field_validator("categories")
    @classmethod
    def _non_empty_categories(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value:
            raise ValueError("give at least one category, or leave categories out for all")
        return value

    @property
    def label(self) -> str:
        """Short human name: ``speed-bench/qualitative[coding]``."""
        text = self.name + (f"/{self.config}" if self.config else "")
        text += f"[{','.join(self.categories)}]" if self.categories else ""
        return text + ((THINKING_ON if self.thinking else THINKING_OFF) if self.thinking_slice else "")


# The two sides of a thinking on/off slice, as a workload's label ends (point ids: gsm8k+thinking).
THINKING_ON, THINKING_OFF = "+thinking", "+no-thinking"
