"""The home as the planner's world: the plan grammar compiled from it, and plan lines checked
against it (typed steps). The home's model, loading and rendering live in orin_llm/environment/."""
