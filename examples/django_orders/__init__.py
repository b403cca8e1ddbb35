"""A Django project with an outbox: an order row, its event and its receipt job in one
`transaction.atomic()` on Django's own connection, and the worker as
`manage.py alkstore worker` (docs/adr/0024). Run from the repository root:

    DATABASE_URL=postgresql://127.0.0.1/orders python -m examples.django_orders.manage migrate
    ... manage alkstore migrate
    ... manage place_order ann@example.com 1250
    ... manage alkstore worker examples.django_orders.orders.jobs:worker --once
    ... manage alkstore status
    ... manage test examples.django_orders.orders     # Django's test runner
"""
