"""``gpuscope demo``: the pipeline on a simulated cluster (:mod:`gpuscope.demo.run`), its
parts (agents, inventory, alerts and actions: :mod:`gpuscope.demo.parts`), and the simulated
week written before it (:mod:`gpuscope.demo.history`, readings computed in a helper process
by :mod:`gpuscope.demo.readings`)."""
