"""An elastic fleet: the autoscaler that moves a fleet of workers toward the workers the work
allows (``crawler.observability.sizing``), the engines it drives (local processes here, EC2
instances in ``crawler.aws``), and the plan of a crawl by a deadline."""
