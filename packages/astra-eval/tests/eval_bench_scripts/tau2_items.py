"""Print tau2 tasks for a scripted agent and user (runs in .venv-tau2): argv[1] limit per domain, argv[2:] domains.

{domain: {task_id: {"actions": [{name, arguments}], "info": [...], "scenario": str(user_scenario)}}}
"""

import json
import sys

from tau2.run import get_tasks

limit, domains = int(sys.argv[1]), sys.argv[2:]
report = {}
for domain in domains:
    report[domain] = {}
    for task in get_tasks(domain, task_split_name="base")[:limit]:
        criteria = task.evaluation_criteria
        actions = [{"name": a.name, "arguments": a.arguments} for a in (criteria.actions or [])
                   if a.requestor == "assistant"] if criteria else []
        report[domain][task.id] = {"actions": actions, "info": list(criteria.communicate_info or []) if criteria else [],
                                   "scenario": str(task.user_scenario)}
print(json.dumps(report))
