"""``gpuscope demo``: the pipeline on a simulated cluster (:mod:`gpuscope.demo.run`), its
parts (agents, inventory, alerts and actions: :mod:`gpuscope.demo.parts`), and the simulated
week written before it (:mod:`gpuscope.demo.history`, its readings computed a run of times at
once by :mod:`gpuscope.demo.readings_fast`, checked against :mod:`gpuscope.demo.readings`)."""
