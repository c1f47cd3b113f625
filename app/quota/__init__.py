"""Sharing a group's quota among the processes that enforce it (PIP-82's enforcement).

Every worker process that enforces a group's rates (a **reporter**) reports what it used and
wants; the server answers with its share. One report's path is `store.submit`.

Glossary:

- **Reporter**: one worker process, by the id it made up; alive while its **lease** holds
  and the grace after it (`leases`), forgotten after (`reporters`). Each report **claims**
  its reporter alive for its lease, in one statement with its lane's batch (`store.claim`).
- **Row**: a reporter's figures for one namespace (usage, demand and allocation per
  dimension), stored in the group it was last written in (`types.Figures`); **held** until a
  figure moves by 5% (`figures`).
- **Fair share**: max-min fair split of the group's rate by demand, namespaces first; it is
  also what a worker falls back to when the server is gone (`allocator`).
- **Summary**: a group's water levels, made from every row, and kept in the group's row
  until a 32nd of its reporters were granted from it after a change (`levels`).
- **Sums in force**: per group and dimension, the allocations of the rows counted in it;
  a rise takes only the room they leave free. Only the **planner** moves them (`planner`).
- **Grant**: a reporter's new allocation, from the summary and the sums; a newcomer's first
  is a **probe**; a **fall** is counted at the old rate until the worker says it applied it.
- **Steady report**: one that changes nothing a plan reads; it writes only its lease.
- **Lane**: a namespace's reports in one process, stored together, a worker's first
  waiting longest; one that waits long **keeps** its worker alive meanwhile; **pace**: how
  often a lane lets its workers report when it cannot keep up (`app.quota.lanes`, `pacing`).
- **Counts**: the units reporters say they used, per group and moment: the figures people
  read (`counts`, `history`).

Every tuning constant is in `tuning`, with what it trades and what chose it.

Versions: each guards what a process remembers, and changes whenever what it guards does.

================  =====================================  ====================================
Version           Changes when                           Guards
================  =====================================  ====================================
admin generation  a write to groups, tenants,            namespaces' groups and limits, who
                  namespaces, rights, the default group  may report (`cache`)
rows token        a reporter's rows are written          the process's copy of its rows
group marker      anything that may change another       a reporter's plan of the group
                  reporter's grant                       (`store._moved_markers`)
group wake        shares moved enough, a share freed     nothing kept: tells the group's
                                                         workers to report now (`changes`)
plan id           a group is planned for a reporter      its answer's parts, serialized once
================  =====================================  ====================================
"""
