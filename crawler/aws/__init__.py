"""Workers on AWS EC2: launch, list, rotate banned ones and scale to zero (``scrapy fleet``).

``config`` reads the ``FLEET_*`` settings, ``userdata`` renders the cloud-init script a worker
boots with, ``instances`` talks to EC2 through boto3 and ``report`` is what a worker runs to tell
the fleet it was banned.
"""
