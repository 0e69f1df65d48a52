"""Load: sending requests. Takes a point's requests and its load shape (closed loop, open-loop arrivals, client
processes, endpoints); gives one timed record per request (``types.RequestResult``) and the client's own cost."""
