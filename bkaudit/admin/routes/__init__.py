"""The admin API's routes, one router per concern (its OpenAPI tag). `admin.app.create_app` adds their
routes in a fixed order: requests are matched in it, the document lists it, and the Guard reads roles from
it."""
